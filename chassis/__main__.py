import sys

from chassis.main import main

sys.exit(main())
