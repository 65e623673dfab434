"""Code that runs beside the user's model: pasted into emitted files (PyTorch alone), imported by the judge."""
