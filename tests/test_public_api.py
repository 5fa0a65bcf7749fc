"""The public API: `trajsynth.__all__` names exactly the public members.

Run: python -m pytest tests/test_public_api.py -q
"""

import types

import trajsynth


def test_all_is_complete() -> None:
    # subpackages (cli, core, envs, quality, ...) appear as attributes once imported; they are
    # reached through their layer, not through `trajsynth.__all__`
    public = {
        n
        for n, v in vars(trajsynth).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    public |= {"__version__"}
    assert set(trajsynth.__all__) == public
    assert len(trajsynth.__all__) == len(set(trajsynth.__all__))  # ruff RUF022 keeps it sorted


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert trajsynth.__version__ == version("trajsynth")
