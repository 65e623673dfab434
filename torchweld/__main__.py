from torchweld.cli import main

raise SystemExit(main())
