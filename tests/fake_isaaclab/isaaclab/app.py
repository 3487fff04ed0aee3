"""Stand-in for ``isaaclab.app``: the ``AppLauncher`` calls a standalone script makes."""


class _App:
    def close(self) -> None:
        """Nothing to stop."""


class AppLauncher:
    """Adds the launcher's options and "starts" the app."""

    def __init__(self, args) -> None:
        self.app = _App()

    @staticmethod
    def add_app_launcher_args(parser) -> None:
        """The options Isaac Lab's launcher adds that the examples use."""
        parser.add_argument("--headless", action="store_true")
        parser.add_argument("--device", default="cpu")
