"""FedMeZO (arXiv:2402.05926) as a Flower app built on flwr-strategies."""
