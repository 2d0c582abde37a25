from fastslow.cli import main

raise SystemExit(main())
