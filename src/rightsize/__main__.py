from rightsize.cli.main import main

raise SystemExit(main())
