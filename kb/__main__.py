"""`python -m kb`: the same CLI as the `kb` console script."""

from kb.cli import main

main()
