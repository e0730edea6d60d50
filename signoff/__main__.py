"""`python -m signoff`."""

from signoff.cli import main

main()
