"""The subcommands of the ``thoughttree`` command, one module per group."""
