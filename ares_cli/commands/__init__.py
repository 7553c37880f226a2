"""One small module per verb: parse options, build a config, call the library."""
