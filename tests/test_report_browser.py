"""The report site as a user opens it: headless Chromium loads the index and one episode page of a run store that this
file's own LangChain and AutoGen agents filled; screenshots land in out/report-browser/ for people to look at."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from guardrail import Guard
from guardrail.core.cli import main
from tests.operate_agents import Shop, fitted_models, run_autogen, run_langchain

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "out" / "report-browser"
# As root on a machine without a network: no sandbox, no GPU, nothing fetched in the background.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1"]


def _chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome")
                 if (path := shutil.which(name))), None)


pytestmark = pytest.mark.skipif(_chromium() is None, reason="no Chromium here: `make test` installs it from Debian "
                                                            "packages (bash scripts/chromium.sh install, as root)")


def _browse(url: str, tmp_path: Path, *, shot: Path | None = None, size: str = "1280,2200") -> str:
    """The page's DOM after its scripts ran (and a screenshot when `shot`)."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    args = [_chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}"]
    args += [f"--screenshot={shot}", url] if shot is not None else ["--dump-dom", url]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A deployment's run store (live + shadow model) rendered by `guardrail report`."""
    models = fitted_models(tmp_path_factory)
    root = tmp_path_factory.mktemp("report-site")
    for name in ("monitor.npz", "next.npz"):
        shutil.copy(models / name, root / name)
    (root / "guardrail.toml").write_text('mode = "report"\n[monitor]\nmodel = "monitor.npz"\n'
                                         'shadow_model = "next.npz"\n[record]\nstore = "runs"\n')
    guard = Guard.from_config(root / "guardrail.toml")
    for seed in (600, 601):
        run_langchain(guard, seed, Shop())
    run_langchain(guard, 602, Shop(), sloppy=True)  # its first call breaks the tool's schema: a gate finding
    for seed in (603, 604):
        asyncio.run(run_autogen(guard, seed, Shop()))
    for seed in (605, 606, 607):
        run_langchain(guard, seed, Shop(shifted=True))
    guard.close()
    assert main(["label", str(root / "runs"), "--clean-as", "healthy"]) == 0
    out = root / "site"
    assert main(["report", str(root / "runs"), "--model", str(root / "monitor.npz"), "-o", str(out)]) == 0
    return out


def test_the_index_lists_every_episode_with_filters_and_the_summary(site, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    index = site / "index.html"
    dom = _browse(index.as_uri(), tmp_path)

    assert "8 of 8 episodes" in dom  # the filter script ran over every row
    assert dom.count("<svg class=\"spark\"") == 8  # every episode's score line drawn, none left out
    assert "Alarm budget: threshold" in dom and "crossfit conformal" in dom
    assert re.search(r"<b>Drift:</b> (no drift|not enough healthy runs|refit recommended)", dom)
    assert "gate" in re.search(r"<select id=\"f-layer\">(.*?)</select>", dom, re.S).group(1)
    filtered = _browse(index.as_uri() + "?framework=autogen", tmp_path)
    assert "2 of 8 episodes" in filtered
    _browse(index.as_uri(), tmp_path, shot=SHOTS / "index.png")
    assert (SHOTS / "index.png").stat().st_size > 10_000


def test_an_episode_page_shows_the_steps_the_finding_and_the_score_plot(site, tmp_path):
    import matplotlib.image

    index = (site / "index.html").read_text()
    link = next(m.group(1) for m in re.finditer(r"<tr [^>]*data-layers='[^']*gate[^']*'[^>]*><td><a href='([^']+)'",
                                                index))
    page = site / link
    dom = _browse(page.as_uri(), tmp_path)

    assert "Please check order" in dom or "Where is my order" in dom or "Order A" in dom  # the task
    assert dom.count("class=\"step") >= 3 and "lookup_order" in dom and "shipping_quote" in dom
    assert "tool_args_valid" in dom and "class=\"step flagged\"" in dom  # the finding, at its step
    assert "&quot;order_id&quot;" in dom or "\"order_id\"" in dom  # the arguments
    assert "id=\"score-plot\"" in dom and "class=\"threshold\"" in dom and "shadow_monitor" in dom
    assert "Live and shadow" in dom and "id=\"answer\"" in dom
    shot = SHOTS / "episode.png"
    _browse(page.as_uri(), tmp_path, shot=shot, size="1280,1400")
    pixels = matplotlib.image.imread(shot)[..., :3]
    blue = (abs(pixels[..., 0] - 31 / 255) < 0.06) & (abs(pixels[..., 1] - 119 / 255) < 0.06) & \
        (abs(pixels[..., 2] - 180 / 255) < 0.06)
    red = (abs(pixels[..., 0] - 214 / 255) < 0.06) & (abs(pixels[..., 1] - 39 / 255) < 0.06) & \
        (abs(pixels[..., 2] - 40 / 255) < 0.06)
    assert blue.sum() > 300 and red.sum() > 100  # the score line and the threshold were drawn
