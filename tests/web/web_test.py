#!/usr/bin/python3
"""The browser build in a real browser: headless Chromium (Debian's) loads build-web/ from a
local server with the cross-origin isolation headers (scripts/web_serve.py), and the test drives
it through the DevTools protocol:

- the default scenario runs: the page's title ("kvscope: minimal.json step S/N", set by the app
  every frame) reaches the last step, and a screenshot of the page is not blank;
- a scenario opened through the page's file-picker code path (kvscopeOpenFile, which the
  "Open file" button calls) replaces it, and a malformed one is refused with the run kept; an
  eval sweep CSV through the same path goes into the Quality panel (a bad one is refused);
- F12 downloads a PNG of the canvas (the page has no disk to save it on);
- Ctrl+S (File > Save recording) downloads the run's .kvr, and Ctrl+O (File > Open) opens the
  browser's own file picker, which the test answers with that file: the recording opens;
- Ctrl+E (File > Export metrics CSV) downloads the run's per-step metrics: every step shown, each
  step's pool adding up;
- ?model=URL fetches SmolLM2's GGUF (served beside the page) before the app starts, and the page
  then opens the SmolLM2 chat, the scenario the desktop build opens with SmolLM2 on disk;
- served by a plain static server (no isolation headers, as GitHub Pages), the page installs its
  service worker (app/web/isolate.js), reloads once, and runs isolated;
- no uncaught exception or console error on the way.

It prints the first frame's time and the frame rate it measured, and "N passed, N failed".
Run by scripts/web.sh --test (and scripts/test.sh): /usr/bin/python3 tests/web/web_test.py DIR.
"""
import base64
import collections
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websocket  # Debian's python3-websocket
from PIL import Image  # Debian's python3-pil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import web_serve  # noqa: E402

# The app's title: the input's name, the step shown and the last step (the transport's numbers;
# -1 before the run's first step has arrived).
# The page's frames per second over 2 s, counted by the browser's animation frames.
FRAME_RATE = ("new Promise(r => { let n = 0; const t0 = performance.now();"
              " function f() { n++; if (performance.now() - t0 < 2000)"
              " requestAnimationFrame(f); else r(n * 1000 / (performance.now() - t0)); }"
              " requestAnimationFrame(f); })")

TITLE = re.compile(r"^kvscope: (?P<name>\S+) step (?P<step>\d+)/(?P<steps>-?\d+)$")


class Browser:
    """Headless Chromium with one page, spoken to over the DevTools protocol."""

    def __init__(self, width=1280, height=720):
        self.profile = tempfile.mkdtemp(prefix="kvscope-chromium-")
        exe = shutil.which("chromium") or "/usr/bin/chromium"
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu-sandbox",
             "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
             f"--window-size={width},{height}", f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start (no DevToolsActivePort)")
            time.sleep(0.1)
        time.sleep(0.2)
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0
        self.errors = []  # console errors and uncaught exceptions
        self.console = []  # every console line, printed when a check fails
        self.events = collections.deque(maxlen=500)  # (method, params), for wait_event
        self.send("Runtime.enable")
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def send(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.note_event(msg)

    def note_event(self, msg):
        method = msg.get("method")
        if method:
            self.events.append((method, msg.get("params", {})))
        if method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description")))
                                         for a in msg["params"]["args"]))
        if method == "Runtime.exceptionThrown":
            d = msg["params"]["exceptionDetails"]
            self.errors.append("exception: " + d.get("exception", {}).get("description", d["text"]))
        elif method == "Runtime.consoleAPICalled" and msg["params"]["type"] == "error":
            args = msg["params"]["args"]
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                            for a in args))

    def eval(self, expression, await_promise=False):
        r = self.send("Runtime.evaluate", expression=expression, awaitPromise=await_promise,
                      returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:60]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def title(self):
        return self.eval("document.title")

    def wait_title(self, predicate, timeout):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.title()
            m = TITLE.match(last or "")
            if m and predicate(m):
                return m
            if last and last.startswith("kvscope: error"):
                raise AssertionError(f"the page says: {last}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s; the title was {last!r}")

    def wait_rest(self, timeout, still=0.6):
        """The title once the run is computed (its last step known) and the title has not
        changed for `still` seconds."""
        deadline = time.time() + timeout
        last, since = None, time.time()
        while time.time() < deadline:
            title = self.title()
            if title != last:
                last, since = title, time.time()
            m = TITLE.match(title or "")
            if m and int(m["steps"]) > 0 and time.time() - since >= still:
                return m
            time.sleep(0.05)
        raise AssertionError(f"the view did not come to rest within {timeout} s: {last!r}")

    def press(self, key, code, key_code):
        """One key tapped as fast as the protocol delivers it: down and up may both land between
        two frames, and the app must still see it (app/core/key_queue.h)."""
        for kind in ("rawKeyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code,
                      windowsVirtualKeyCode=key_code, nativeVirtualKeyCode=key_code)

    def press_ctrl(self, letter):
        """Ctrl+letter tapped as fast as the protocol delivers it: Control down, the letter down
        and up, Control up, perhaps all between two frames (see press)."""
        code = ord(letter.upper())
        ctrl = dict(key="Control", code="ControlLeft", windowsVirtualKeyCode=17,
                    nativeVirtualKeyCode=17)
        key = dict(key=letter, code="Key" + letter.upper(), windowsVirtualKeyCode=code,
                   nativeVirtualKeyCode=code)
        self.send("Input.dispatchKeyEvent", type="rawKeyDown", modifiers=2, **ctrl)
        self.send("Input.dispatchKeyEvent", type="rawKeyDown", modifiers=2, **key)
        self.send("Input.dispatchKeyEvent", type="keyUp", modifiers=2, **key)
        self.send("Input.dispatchKeyEvent", type="keyUp", modifiers=0, **ctrl)

    def wait_event(self, method, timeout):
        """The parameters of the next `method` event (one that came during a command too)."""
        deadline = time.time() + timeout
        while True:
            for i, (m, params) in enumerate(self.events):
                if m == method:
                    del self.events[i]
                    return params
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"no {method} within {timeout} s")
            self.ws.settimeout(left)
            try:
                self.note_event(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
            finally:
                self.ws.settimeout(60)

    @contextlib.contextmanager
    def downloads(self):
        """A new folder the page's downloads go to, removed afterwards."""
        folder = tempfile.mkdtemp(prefix="kvscope-downloads-")
        try:
            self.send("Page.setDownloadBehavior", behavior="allow", downloadPath=folder)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def downloaded(self, folder, suffix, timeout):
        """The path of the first file ending in `suffix` downloaded into `folder`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = [f for f in os.listdir(folder) if f.endswith(suffix)]
            if done:
                time.sleep(0.5)  # the download is written, then renamed into place
                return os.path.join(folder, done[0])
            time.sleep(0.2)
        raise AssertionError(f"nothing ending in {suffix} was downloaded within {timeout} s")

    def screenshot(self):
        data = self.send("Page.captureScreenshot", format="png")["data"]
        return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


def distinct_colours(image):
    small = image.resize((320, 180))
    return len(set(small.getdata()))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-web")
    if not os.path.isfile(os.path.join(root, "index.html")):
        print(f"web_test.py: {root}/index.html: not found (run scripts/web.sh first)",
              file=sys.stderr)
        return 2
    smollm2 = os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(smollm2):
        print(f"web_test.py: {smollm2}: not found (scripts/models.sh fetches it)", file=sys.stderr)
        return 2
    server = web_serve.make_server(
        root, 0, files={"/models/SmolLM2-135M-Instruct.Q4_1.gguf": smollm2})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
    results = []

    def check(name, fn):
        try:
            fn()
            results.append((name, None))
            print(f"[ PASS ] {name}")
        except Exception as e:  # noqa: BLE001: every failure is reported, then counted
            results.append((name, e))
            print(f"[ FAIL ] {name}: {e}")
            for line in (browser.console[-15:] if browser else []):
                print(f"  console: {line}")

    def renderer_draws_imgui_backends_pixels():
        # kvscope's renderer (app/renderer.h) and Dear ImGui's own OpenGL3 backend
        # (?renderer=imgui) draw the same last step of the same run: the same pixels, on the
        # browser's WebGL. Each page's frame rate is printed, measured the same way.
        shots = {}
        for name in ("imgui", "kvscope"):
            other = Browser()  # a fresh browser each: no page left over from the other
            try:
                other.send("Page.navigate", url=f"{url}?renderer={name}")
                other.wait_title(lambda m: True, timeout=60)
                other.wait_rest(timeout=30)
                other.press("End", "End", 35)
                other.wait_title(lambda m: m["step"] == m["steps"], timeout=30)
                other.wait_rest(timeout=30)
                fps = other.eval(FRAME_RATE, await_promise=True)
                shots[name] = other.screenshot().convert("RGB")
                print(f"  {name}'s renderer: {fps:.0f} frames/s")
                assert not other.errors, f"{name}: {other.errors[0]}"
            finally:
                other.close()
        assert shots["imgui"].size == shots["kvscope"].size, "the screenshots' sizes differ"
        differ = sum(1 for a, b in zip(shots["imgui"].getdata(), shots["kvscope"].getdata())
                     if a != b)
        assert differ == 0, f"{differ} pixels differ from ImGui's backend's"
        colours = distinct_colours(shots["kvscope"])
        assert colours > 50, f"the page looks blank: {colours} distinct colours"

    # First, with no other browser drawing beside it (the frame rates are compared).
    browser = None
    check("kvscope's renderer draws the pixels of ImGui's OpenGL3 backend",
          renderer_draws_imgui_backends_pixels)
    browser = Browser()
    try:
        def default_scenario_runs():
            t0 = time.time()
            browser.send("Page.navigate", url=url)
            first = browser.wait_title(lambda m: True, timeout=60)
            first_frame = time.time() - t0
            assert first["name"] == "minimal.json", f"opened {first['name']}, not minimal.json"
            # While the run's worker computes it the view follows it to the first caption that
            # pauses (minimal's step 10); a run already done when the view opens stays at step 0.
            assert int(first["step"]) <= 10, f"opened at step {first['step']}, not 0..10"
            rest = browser.wait_rest(timeout=30)
            assert rest["step"] in ("0", "10"), f"the view came to rest at step {rest['step']}"
            browser.press("Home", "Home", 36)  # the first step
            browser.wait_title(lambda m: m["step"] == "0", timeout=30)
            browser.press(" ", "Space", 32)  # play
            playing = browser.wait_title(lambda m: int(m["step"]) >= 5, timeout=30)
            browser.press("End", "End", 35)  # the last step
            last = browser.wait_title(lambda m: m["step"] == m["steps"], timeout=30)
            print(f"  first frame {first_frame:.2f} s after navigation; played to step "
                  f"{playing['step']}, then End reached {last['step']}/{last['steps']}")
            fps = browser.eval(FRAME_RATE, await_promise=True)
            print(f"  {fps:.0f} frames/s in headless Chromium (software WebGL)")
            image = browser.screenshot()
            colours = distinct_colours(image)
            assert image.size == (1280, 720), f"screenshot is {image.size}"
            assert colours > 50, f"the page looks blank: {colours} distinct colours"
            print(f"  screenshot {image.size[0]}x{image.size[1]}, {colours} distinct colours")

        def picked_scenario_opens():
            text = open(os.path.join(ROOT, "scenarios", "block-size.json")).read()
            opened = browser.eval(
                f"kvscopeOpenFile(new File([{json.dumps(text)}], 'my-block-size.json'))",
                await_promise=True)
            assert opened == 1, f"kvscopeOpenFile returned {opened}"
            # Its run goes on on the engine's worker: steps appear as they are computed.
            browser.wait_title(lambda m: m["name"] == "my-block-size.json" and int(m["steps"]) > 0,
                               timeout=60)

        def malformed_file_is_refused():
            before = browser.wait_title(lambda m: True, timeout=10)
            opened = browser.eval(
                "kvscopeOpenFile(new File(['{\"name\": 3'], 'broken.json'))", await_promise=True)
            assert opened == 0, f"a malformed scenario was opened ({opened})"
            after = browser.wait_title(lambda m: True, timeout=10)
            assert after["name"] == before["name"], f"the run changed to {after['name']}"

        def sweep_csv_goes_into_the_quality_panel():
            header = ("variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,"
                      "ppl_reference,ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n")
            good = (header + "fp32,1280,0,1280,5.5,5.5,0,0,0,1\n"
                    "int8,340,0,340,5.5,5.52,0.02,0.001,0.01,0.99\n")
            bad = header + "int8,340,0,340,5.5,5.52,0.02,lots,0.01,0.99\n"
            before = browser.wait_title(lambda m: True, timeout=10)
            for text, name, want in ((good, "quant_sweep.csv", 1), (bad, "bad_sweep.csv", 0)):
                got = browser.eval(
                    f"kvscopeOpenFile(new File([{json.dumps(text)}], '{name}'))", await_promise=True)
                assert got == want, f"{name}: kvscopeOpenFile returned {got}, expected {want}"
            after = browser.wait_title(lambda m: True, timeout=10)
            assert after["name"] == before["name"], f"a CSV replaced the run with {after['name']}"

        check("the default scenario runs to its last step", default_scenario_runs)
        check("a scenario opened through the file picker runs", picked_scenario_opens)
        check("a malformed scenario is refused and the run kept", malformed_file_is_refused)
        check("an eval sweep CSV from the picker goes into the Quality panel; a bad one is refused",
              sweep_csv_goes_into_the_quality_panel)
        def screenshot_downloads():
            with browser.downloads() as downloads:
                browser.press("F12", "F12", 123)
                png = browser.downloaded(downloads, ".png", timeout=30)
                image = Image.open(png).convert("RGB")
                assert image.size[0] == 1280, f"the screenshot is {image.size}, not 1280 wide"
                assert distinct_colours(image) > 50, "the downloaded screenshot is blank"
                print(f"  F12 downloaded {os.path.basename(png)} "
                      f"({image.size[0]}x{image.size[1]})")

        def recording_saved_and_reopened():
            with browser.downloads() as downloads:
                shown = browser.wait_title(lambda m: int(m["steps"]) > 0, timeout=30)
                browser.press_ctrl("s")  # File > Save recording: a download in the browser
                kvr = browser.downloaded(downloads, ".kvr", timeout=30)
                with open(kvr, "rb") as f:
                    assert f.read(8) == b"KVSCOPER", f"{kvr} is not a kvscope recording"
                name = os.path.basename(kvr)
                assert name == shown["name"].replace(".json", ".kvr"), f"downloaded as {name}"
                # File > Open (Ctrl+O): the browser's own file picker, answered with that file.
                browser.send("Page.setInterceptFileChooserDialog", enabled=True)
                try:
                    browser.press_ctrl("o")
                    chooser = browser.wait_event("Page.fileChooserOpened", timeout=10)
                    browser.send("DOM.setFileInputFiles", files=[kvr],
                                 backendNodeId=chooser["backendNodeId"])
                finally:
                    browser.send("Page.setInterceptFileChooserDialog", enabled=False)
                m = browser.wait_title(lambda m: m["name"] == name and int(m["steps"]) > 0,
                                       timeout=30)
                print(f"  Ctrl+S downloaded {name} ({os.path.getsize(kvr)} bytes); Ctrl+O's "
                      f"picker opened it: {m['steps']} steps")

        def metrics_csv_downloads():
            with browser.downloads() as downloads:
                shown = browser.wait_title(lambda m: int(m["steps"]) > 0, timeout=30)
                browser.press_ctrl("e")  # File > Export metrics CSV: a download in the browser
                path = browser.downloaded(downloads, ".csv", timeout=30)
                name = os.path.basename(path)
                stem = os.path.splitext(shown["name"])[0]
                assert name == stem + "-metrics.csv", f"downloaded as {name}"
                with open(path) as f:
                    rows = [line.rstrip("\n").split(",") for line in f]
                header, rows = rows[0], rows[1:]
                assert header[:3] == ["step", "blocks_total", "blocks_used"], (
                    f"{name}: header {header[:3]}")
                assert all(len(r) == len(header) for r in rows), f"{name}: ragged rows"
                steps = [int(r[0]) for r in rows]
                assert steps == list(range(int(shown["steps"]) + 1)), (
                    f"{name}: steps {steps[:3]}..{steps[-1:]}, not 0..{shown['steps']}")
                # Every step's pool adds up, and finished requests only accumulate.
                for r in rows:
                    m = {k: int(v) for k, v in zip(header[:5], r)}
                    pool = m["blocks_used"] + m["blocks_cached_free"] + m["free_blocks"]
                    assert pool == m["blocks_total"], (
                        f"{name}: step {m['step']}'s blocks do not add up: {r[:5]}")
                finished = [int(r[header.index("requests_finished")]) for r in rows]
                assert finished == sorted(finished), f"{name}: requests_finished went down"
                print(f"  Ctrl+E downloaded {name}: steps 0..{steps[-1]}, {len(header)} columns, "
                      f"{finished[-1]} requests finished")

        def smollm2_from_a_url():
            t0 = time.time()
            browser.send("Page.navigate",
                         url=url + "?model=models/SmolLM2-135M-Instruct.Q4_1.gguf")
            # While the chat's first step (its prompts' prefill) computes on the engine's
            # worker, the page keeps running: its status line counts the seconds.
            counted = set()
            deadline = time.time() + 120
            while time.time() < deadline:
                try:  # the new document may not be there yet
                    line = browser.eval(
                        "(() => { const s = document.getElementById('status'), "
                        "t = document.getElementById('status-text'); "
                        "return s && t && !s.classList.contains('hidden') ? t.textContent : ''; "
                        "})()") or ""
                except RuntimeError:
                    line = ""
                m = re.search(r"opening smollm2-chat\.json: computing its first step\.\.\. "
                              r"(\d+) s$", line)
                if m:
                    counted.add(int(m.group(1)))
                try:
                    if TITLE.match(browser.title() or ""):
                        break
                except RuntimeError:
                    pass
                time.sleep(0.2)
            m = browser.wait_title(lambda m: m["name"] != "minimal.json", timeout=10)
            assert m["name"] == "smollm2-chat.json", f"opened {m['name']}, not smollm2-chat.json"
            assert len(counted) >= 2, (
                f"the status line did not count the first step's seconds (saw {sorted(counted)})")
            print(f"  SmolLM2 (98 MB) fetched, loaded and its chat shown after its first step in "
                  f"{time.time() - t0:.1f} s; the page counted {min(counted)}-{max(counted)} s "
                  f"meanwhile")

        check("F12 downloads a screenshot of the canvas", screenshot_downloads)
        check("Ctrl+S downloads the recording and Ctrl+O's file picker opens it again",
              recording_saved_and_reopened)
        check("Ctrl+E downloads the run's per-step metrics as CSV", metrics_csv_downloads)
        check("?model= loads SmolLM2 and opens its chat, as the desktop build does",
              smollm2_from_a_url)
        def isolated_by_its_service_worker():
            plain = web_serve.make_server(root, 0, isolated=False)
            threading.Thread(target=plain.serve_forever, daemon=True).start()
            try:
                t0 = time.time()
                browser.send("Page.navigate",
                             url=f"http://127.0.0.1:{plain.server_address[1]}/index.html")
                first = browser.wait_title(lambda m: True, timeout=60)
                assert first["name"] == "minimal.json", f"opened {first['name']}"
                state = browser.eval("[self.crossOriginIsolated, !!(navigator.serviceWorker "
                                     "&& navigator.serviceWorker.controller)]")
                assert state == [True, True], (
                    f"crossOriginIsolated, controlled by isolate.js: {state}")
                print(f"  from a server without the headers: isolated by isolate.js, first frame "
                      f"{time.time() - t0:.2f} s after navigation (a reload included)")
            finally:
                plain.shutdown()

        check("served without the isolation headers, the page isolates itself and runs",
              isolated_by_its_service_worker)
        check("no uncaught exception or console error",
              lambda: (_ for _ in ()).throw(AssertionError("; ".join(browser.errors)))
              if browser.errors else None)
    finally:
        browser.close()
        server.shutdown()
    failed = sum(1 for _, e in results if e is not None)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
