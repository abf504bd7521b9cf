"""DO-ADP (arXiv:2506.07102) as a Flower app built on flwr-strategies."""
