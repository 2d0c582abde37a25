from competition.cli import main

raise SystemExit(main())
