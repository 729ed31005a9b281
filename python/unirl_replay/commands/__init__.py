"""One module per ``unirl-replay`` subcommand; each defines a click command named ``command``."""
