"""DFedCata (arXiv:2410.07272) as a Flower app built on flwr-strategies."""
