"""Reads `wrk --latency` output; prints: requests/s p50_ms p99_ms non_2xx."""
import re
import sys

text = sys.stdin.read()


def ms(label):
    m = re.search(r"^\s*" + re.escape(label) + r"\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
errors = re.search(r"Socket errors:.*", text)
if errors:
    print("   " + errors.group(0), file=sys.stderr)
print(f"{rps:.0f} {ms('50%'):.2f} {ms('99%'):.2f} {int(bad.group(1)) if bad else 0}")
