"""FedLi-LS (Geetika, Uniyal, Chatterjee, "Towards Hyper-parameter-free Federated Learning") as a Flower app built on flwr-strategies."""
