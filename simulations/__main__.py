"""``python -m flwr_strategies.simulations`` (also ``python -m simulations`` from a clone's root,
and the ``flwr-strategies`` console script)."""

import sys

from flwr_strategies.simulations.cli import main

sys.exit(main())
