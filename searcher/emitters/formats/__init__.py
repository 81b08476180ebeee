"""One module per launch format; the module name is the format name, its ``EMITTER`` the emitter."""
