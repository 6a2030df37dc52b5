"""Runtime features of debug and trace modes: the hang watchdog that names stuck roles, and the pipeline timeline."""
