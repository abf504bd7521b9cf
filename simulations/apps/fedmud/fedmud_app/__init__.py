"""FedMUD (ICML 2025) as a Flower app built on flwr-strategies."""
