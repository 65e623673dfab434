"""`torchweld bench`: judge a whole directory of problems and render reports from the saved results."""
