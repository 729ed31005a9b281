"""The ``unirl-replay`` command line: ``main`` (the entry point) and one module per verb.

Each verb module defines a click command named ``command``, is imported only when invoked, and
stays thin: it parses options and calls the stage that does the work. The CLI may import every
stage; no stage imports the CLI.
"""
