"""An instance's lifecycle states: ``starting`` -> ``up`` -> (``draining`` ->) ``down``."""
STARTING, UP, DRAINING, DOWN = "starting", "up", "draining", "down"
