"""Packaging beyond what pyproject.toml can declare: the shipped configs live once, in the repository's `configs/`
(where the README, the Makefile and the tests name them), and the wheel carries them as `rllm/configs/*.yaml`
(package data: `rllm configs`, `rllm train NAME`). A package-dir mapping cannot do this next to
`packages.find`, and a symlink breaks sdists and Windows checkouts; so build_py copies them. MANIFEST.in puts
them in the sdist, from which `python -m build` builds the wheel."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConfigs(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's configs/ (rllm.cli.configs)
            return
        target = Path(self.build_lib, "rllm", "configs")
        self.mkpath(str(target))
        for config in sorted(Path("configs").glob("*.yaml")):
            self.copy_file(str(config), str(target / config.name))


setup(cmdclass={"build_py": BuildPyWithConfigs})
