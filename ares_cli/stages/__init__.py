"""Stage logic behind the CLI verbs: inputs in, artifact out. Commands stay thin; math stays elsewhere."""
