#!/usr/bin/env bash
# The systemd unit in packaging/systemd, pointed at the built binary, checked
# by systemd itself: `systemd-analyze verify` (no warning allowed) and its
# offline security review (exposure must stay at or under 6.0 (60 on its scale); it is 5.8:
# agents need more of the system than a plain network service).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/binary.sh
unit=packaging/systemd/shepherd.service
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s#^ExecStart=/usr/local/bin/shepherd #ExecStart=$SHEPHERD_BIN #" "$unit" > "$dir/shepherd.service"
grep -q "^ExecStart=$SHEPHERD_BIN serve$" "$dir/shepherd.service"

if ! out=$(systemd-analyze verify --man=no "$dir/shepherd.service" 2>&1); then
  echo "$out"
  exit 1
fi
if [ -n "$out" ]; then
  echo "systemd-analyze verify warned about $unit:"
  echo "$out"
  exit 1
fi
for key in User=shepherd StateDirectory=shepherd NoNewPrivileges=yes PrivateTmp=yes \
           ProtectSystem=strict KillMode=process; do
  grep -qx "$key" "$unit" || { echo "$unit lost $key"; exit 1; }
done
systemd-analyze security --offline=true --threshold=60 "$dir/shepherd.service" > "$dir/security.txt" 2>&1 || {
  tail -20 "$dir/security.txt"
  exit 1
}
echo "ok: $unit verifies; $(tail -1 "$dir/security.txt")"
