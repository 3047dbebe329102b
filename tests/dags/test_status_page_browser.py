"""The status page in a real browser (headless Chromium through Selenium), served by a real Airflow API
server (uvicorn, the plugin mounted at /mirror-core/), with a real mirror reporting to the state store.

Nothing records the config here: the flows appear because the mirror instance reports them (and the
page reads the config file for their clusters). Screenshots (light and dark) go to pytest's tmp dir;
their paths are printed (``pytest -rP`` or ``-s`` shows them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.state.models import Failover, FlowInstance
from mirror_core.state.store import StateStore
from tests.dags.conftest import api_server
from tests.kafka_harness import MirrorProcess, create_topic, produce_sequence, wait_until, write_config

RECORDS = 3000


@pytest.fixture
def browser() -> Iterator[Any]:
    # A failure, not a skip: a skipped browser test would hide a missing install step.
    assert shutil.which("chromium") and shutil.which("chromedriver"), \
        "Chromium missing: make install runs scripts/ensure-test-servers.sh"
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1440,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def visible_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def flow_card(driver: Any, flow: str) -> dict[str, Any]:
    """What the page shows of one flow: state badge, lag number, chart points, text."""
    return dict(driver.execute_script("""
        const card = [...document.querySelectorAll('article.flow')].find(a => a.dataset.flow === arguments[0]);
        if (!card) return {};
        const lag = card.querySelector('[data-lag]'), chart = card.querySelector('svg.chart');
        return {state: card.dataset.state, lag: lag ? lag.textContent : null,
                points: chart ? chart.querySelectorAll('circle.pt').length : 0, text: card.innerText};
    """, flow) or {})


def summary_json(driver: Any, base: str) -> dict[str, Any]:
    """/mirror-core/api/summary as the browser (its session) gets it."""
    text = driver.execute_async_script("""
        fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.text()).then(arguments[1]);
    """, f"{base}/mirror-core/api/summary")
    return dict(json.loads(text))


def test_status_page_in_a_browser(dc1: str, dc2: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  airflow_token: str, browser: Any) -> None:
    from mirror_airflow import status_app, status_lag
    from mirror_airflow.plugin import NAV_LABEL
    from selenium.webdriver.common.by import By

    # Refresh and sample fast so the chart gets points within seconds (production: 10 s and 8 s).
    monkeypatch.setattr(status_app, "REFRESH_S", 2)
    monkeypatch.setattr(status_lag, "LAG_TTL_S", 1.0)
    monkeypatch.setattr(status_app, "LAGS", status_app.LagBoard())

    create_topic(dc1, f"{name}.orders", 3)
    produce_sequence(dc1, f"{name}.orders", 3, RECORDS)
    config = write_config(tmp_path / "mm2.properties",
                          {"primary": dc1, "backup": dc2, "gone": f"127.0.0.1:{free_port()}"},
                          ["primary->backup.enabled = true", f"primary->backup.topics = {name}\\..*",
                           "backup->primary.enabled = false", f"backup->primary.topics = {name}\\..*",
                           "primary->gone.enabled = true", f"primary->gone.topics = {name}\\..*",
                           "emit.heartbeats.enabled = false", "emit.checkpoints.enabled = false"])
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])  # the plugin's store (tests/dags/conftest.py)
    store.migrate()
    # A workflow started the standby flow (as a failover does): it must show as running, not standby.
    store.set_flow_desired("backup->primary", "running", "carol", "failover drill", "manual__1")
    for rpo, rto in ((40, 21.5), (12, 14.0), (0, 9.5)):
        store.record_drill("primary->backup", "manual__drill", "passed", datetime.now(UTC),
                           rpo, rto, 0, 0, {})
    store.add(Failover(kind="failover", flow="primary->backup", planned=True, status="done", approved_by="carol",
                       run_id="manual__fo"))
    mirror = MirrorProcess(config, tmp_path, "page-mirror",
                           ["--state-db", store.url, "--instance-id", "page-mirror-0"]).start()
    try:
        with api_server() as base:
            browser.get(f"{base}/mirror-core/api/summary")  # any page of the origin, to set the session cookie
            browser.add_cookie({"name": "_token", "value": airflow_token, "path": "/"})
            browser.get(f"{base}/mirror-core/")

            last_card: dict[str, Any] = {}

            def shown() -> dict[str, Any] | None:
                card = flow_card(browser, "primary->backup")
                last_card.update(card, unreachable_shown="cluster gone unreachable" in visible_text(browser))
                ok = (card.get("state") == "running" and card.get("lag") == "0" and card.get("points", 0) >= 3
                      and last_card["unreachable_shown"])
                return card if ok else None

            try:
                card = wait_until(shown, 180, interval=1, what="flow running, lag 0, chart, unreachable cluster")
            except AssertionError as exc:
                text = mirror.log_path.read_text(errors="replace")
                control = [line for line in text.splitlines() if "control plane" in line or "state store" in line]
                with store.session() as s:
                    rows = [(r.instance, r.flow, r.state, str(r.seen_at)) for r in s.scalars(select(FlowInstance))]
                raise AssertionError(f"{exc}; the card: {last_card}; now {datetime.now(UTC)}; instance rows: {rows}; "
                                     f"the mirror's control-plane lines: {control[-20:]}; its log ends: "
                                     f"{text[-2000:]}") from None
            assert "page-mirror-0: running" in card["text"], card["text"]
            assert "auto (the default): batches" in card["text"], card["text"]  # the data path and why
            assert flow_card(browser, "backup->primary")["state"] == "running"  # standby, started by a workflow
            gone = flow_card(browser, "primary->gone")
            assert gone["state"] == "running" and gone["lag"] is None and "lag unknown" in gone["text"], gone
            text = visible_text(browser)
            attention = text.split("Needs attention first", 1)[1].split("Flows", 1)[0]
            assert "cluster gone unreachable" in attention and "primary->gone" in attention, attention
            assert re.search(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text[:300]
            assert not re.search(r"\b(None|True|False|nan)\b", text), re.findall(r".{40}\b(?:None|True|False)\b.{20}",
                                                                                   text)
            # Per-partition lag, the drill trend chart, nothing empty shown as a section.
            # (the heartbeats topics are copied whatever the filter, as MirrorMaker 2 does: there when an earlier test
            # of the session emitted some)
            assert re.search(r"\b\d+ partitions, 0 lagging", card["text"]), card["text"]
            assert re.search(rf"{name}\.orders\s+2\s+0\s+1,000\s+1,000", card["text"]), card["text"]
            drill_points = browser.execute_script("return [...document.querySelectorAll('#drills svg.chart')]"
                                                  ".map(s => s.querySelectorAll('circle').length)")
            assert drill_points == [3, 3], drill_points
            assert "Nothing recorded yet:" in text and "cutovers" in text.split("Nothing recorded yet:")[1]
            failovers = browser.execute_script("return document.getElementById('failovers').innerText")
            assert re.search(r"\d\d:\d\d:\d\d UTC\s+—\s+—\s+failover\s+primary->backup\s+planned\s+done\s+carol",
                             failovers), failovers

            # A paused partition an instance reports: the reason is shown whole (quotes and backticks as is).
            why = (f"source cluster primary: record batch at offsets 40-79 (1234 bytes) of {name}.orders[1] is "
                   "damaged: `mirror-core partitions skip --flow primary->backup --offsets 40-79 --reason \"x\"`")
            store.report_flow_states("page-mirror-9", {"primary->backup": "running"}, paused={
                "primary->backup": [{"topic": f"{name}.orders", "partition": 1, "reason": why}]})
            wait_until(lambda: why in browser.execute_script(
                "const s = document.getElementById('paused-partitions'); return s ? s.innerText : ''"),
                15, what="the paused partition's reason")

            # A burst: some sample sees it replicated (throughput) and the lag is back to 0.
            produce_sequence(dc1, f"{name}.orders", 3, 30_000, start=RECORDS)

            def burst_seen() -> bool:
                flow = next(f for f in summary_json(browser, base)["flows"] if f["name"] == "primary->backup")
                return flow["lag"] == 0 and any((s["records_per_s"] or 0) > 0 for s in flow["lag_history"])

            wait_until(burst_seen, 30, interval=1, what="the burst in the lag history")
            browser.get(f"{base}/mirror-core/")
            wait_until(lambda: flow_card(browser, "primary->backup").get("points", 0) >= 3, 30, what="the page again")

            # The refresh replaces the content without a reload: the scroll position stays.
            browser.execute_script("window.scrollTo(0, 400)")
            browser.execute_script("document.getElementById('content').dataset.gen = 'old'")
            wait_until(lambda: browser.execute_script("return document.getElementById('content').dataset.gen") is None,
                       15, what="a refresh of the content")
            assert browser.execute_script("return window.scrollY") == 400

            # Airflow's own UI links the page from its navigation, the label whole (not cut with an ellipsis).
            browser.get(f"{base}/")
            label = wait_until(lambda: browser.find_elements(By.XPATH, f"//*[text()='{NAV_LABEL}']"), 60,
                               what="the navigation link")[0]
            assert browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", label)
            browser.get(f"{base}/mirror-core/")
            wait_until(lambda: flow_card(browser, "primary->backup").get("points", 0) >= 3, 30, what="the page again")

            shots = [tmp_path / "status-page-light.png", tmp_path / "status-page-dark.png"]
            browser.execute_script("window.scrollTo(0, 0)")
            browser.set_window_size(1440, browser.execute_script("return document.body.scrollHeight") + 120)
            browser.save_screenshot(str(shots[0]))
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                    {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
            bg = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
            assert bg == "rgb(9, 9, 11)", bg
            browser.save_screenshot(str(shots[1]))
            for shot in shots:
                assert shot.stat().st_size > 10_000
                print(f"screenshot: {shot}")
    finally:
        # Not SIGTERM: a clean stop waits out the ~30 s readiness probe of primary->gone's dead cluster.
        mirror.ensure_dead()
