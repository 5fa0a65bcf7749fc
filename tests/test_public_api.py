"""The public API: `trajsynth.__all__` names exactly the public members.

Run: python -m pytest tests/test_public_api.py -q
"""

import trajsynth


def test_all_is_complete() -> None:
    import pkgutil

    subpackages = {m.name for m in pkgutil.iter_modules(trajsynth.__path__)}
    public = {n for n in vars(trajsynth) if not n.startswith("_")} - subpackages
    public |= {"__version__"}
    assert set(trajsynth.__all__) == public
    assert len(trajsynth.__all__) == len(set(trajsynth.__all__))  # ruff RUF022 keeps it sorted


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert trajsynth.__version__ == version("trajsynth")
