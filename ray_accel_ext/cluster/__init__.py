"""The cluster side: what every node published (:mod:`.nodes`), the cluster inventory, node health,
and the dashboard. Reads Ray's state; never runs discovery on other nodes."""
