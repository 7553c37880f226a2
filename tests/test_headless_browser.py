"""The browser check itself: it does report a broken image, a console error and an uncaught exception."""

from __future__ import annotations

import pytest
from headless_browser import find_browser, load_page


def test_browser_check_sees_broken_images_and_console_errors(tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no headless browser (install the Debian package 'chromium'; .ci/run does)")
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img alt="bad" src="data:image/png;base64,AAAA">'
        '<img alt="missing" src="missing.png"><script>console.error("boom"); undefined_name();</script>'
        "</body></html>"
    )
    seen = load_page(page, browser)
    assert [(i["alt"], i["width"]) for i in seen["images"]] == [("bad", 0), ("missing", 0)]
    assert [c["type"] for c in seen["console"]] == ["error"]
    assert len(seen["exceptions"]) == 1
    assert seen["failed_requests"]
