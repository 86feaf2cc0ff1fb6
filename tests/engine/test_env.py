"""engine/env.py: where the cache lives, by the environment."""

from engine import env


def test_the_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(env.CACHE_DIR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert env.cache_dir() == tmp_path / "home" / ".cache" / "chassis"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert env.cache_dir() == tmp_path / "xdg" / "chassis"
    monkeypatch.setenv(env.CACHE_DIR, "~/elsewhere")
    assert env.cache_dir() == tmp_path / "home" / "elsewhere"
    monkeypatch.setenv(env.CACHE_DIR, "OFF")
    assert env.cache_dir() is None
