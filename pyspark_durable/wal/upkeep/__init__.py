"""What runs beside the writers: the cleaner and the integrity check."""
