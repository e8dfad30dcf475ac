#!/usr/bin/env bash
# Alternate the loopback route's quickack off/on, 16 KiB compare each.
cd /work/main
out=docs/bench/2026-11-30/session52/probes/quickack-route
mkdir -p $out
for cyc in 1 2 3 4 5; do
  for qa in off on; do
    if [ $qa = on ]; then ip route replace local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 quickack 1;
    else ip route replace local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1; fi
    ip route show table local | grep '127.0.0.0/8' >> $out/routes.txt
    echo "== cycle $cyc quickack $qa" 
    /tmp/tb-main compare --payload 16384 --concurrency 32,256 --systems tram,protosocket,floor --rounds 3 --out $out/c$cyc-$qa
  done
done
ip route replace local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1
ip route show table local | grep '127.0.0.0/8'
