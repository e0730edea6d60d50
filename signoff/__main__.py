"""`python -m signoff`."""

from signoff.cli.main import main

main()
