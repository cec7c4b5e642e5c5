"""lipschitz."""
