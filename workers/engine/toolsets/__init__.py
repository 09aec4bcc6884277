"""Read-only toolsets offered to the planner: one registry, one definition per tool."""
