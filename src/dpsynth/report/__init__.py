"""Report stage: the papers' tables and figures with our numbers beside the published ones."""
