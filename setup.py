"""The wheel's build (the rest is pyproject.toml): it also puts the dashboard's pinned browser assets
(versions.yml's web_assets, fetched through the cache) into mpiplat/dashboard/vendor/."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithAssets(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install serves them from the cache
            return
        sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
        from mpiplat.dashboard import assets

        assets.copy_into(Path(self.build_lib) / "mpiplat" / "dashboard" / "vendor")


setup(cmdclass={"build_py": BuildWithAssets})
