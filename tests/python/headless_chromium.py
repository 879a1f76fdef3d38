"""A page in headless Chromium (Debian's `chromium`), driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4, so no extra package): open a URL, wait in real time
until a JavaScript condition holds, take its value and a PNG screenshot."""
import base64
import fcntl
import json
import os
import shutil
import subprocess
import time


class HeadlessPage:
    def __init__(self, url, profile_dir, width=1400, height=900):
        chromium = shutil.which("chromium")
        assert chromium, "chromium not found: scripts/setup.sh installs the Debian package"
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()
        to_child, from_child = (self._above_4(fd) for fd in (to_child, from_child))
        # fd 3: what Chromium reads (our commands), fd 4: what it writes (answers and events)
        script = f'exec "$0" "$@" 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, chromium, "--headless", "--no-sandbox", "--remote-debugging-pipe",
             f"--user-data-dir={profile_dir}", f"--window-size={width},{height}", "--hide-scrollbars", "about:blank"],
            pass_fds=(to_child, from_child), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buffer, self._id = b"", 0
        target = self._call("Target.createTarget", {"url": url})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    @staticmethod
    def _above_4(fd):
        """The same pipe end on a descriptor above 4 (the child's 3 and 4 are made from it)."""
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _call(self, method, params=None, session=None):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._in, 1 << 16)
                assert chunk, "chromium closed the DevTools pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    def evaluate(self, expression):
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self._session)
        return result["result"].get("value")

    def wait_for(self, expression, timeout):
        """The value of `expression` once it is truthy (polled in real time), else None after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := self.evaluate(expression):
                return value
            time.sleep(0.5)
        return None

    def screenshot(self):
        return base64.b64decode(self._call("Page.captureScreenshot", {"format": "png"}, self._session)["data"])

    def close(self):
        try:
            self._call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._in)
        os.close(self._out)
