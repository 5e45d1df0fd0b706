# bench/lib/latency.sh: sourced by the benchmarks that reach the test S3 server through a
# toxiproxy proxy adding round-trip latency. Needs the env file of .ci/services.sh loaded
# (COFFER_TEST_TOXIPROXY, COFFER_TEST_S3_ENDPOINT).

# toxiproxy_api METHOD PATH [BODY]: one call to toxiproxy's HTTP API.
toxiproxy_api() { curl -sSf --max-time 10 -X "$1" "$COFFER_TEST_TOXIPROXY$2" ${3:+-d "$3"}; }

# proxy_for MS: a proxy to the S3 server with MS of added round trip (half each way);
# prints its endpoint (http://127.0.0.1:PORT).
proxy_for() {
    local ms=$1 name=bench-$1 listen
    toxiproxy_api DELETE "/proxies/$name" >/dev/null 2>&1 || true
    listen=$(toxiproxy_api POST /proxies "{\"name\":\"$name\",\"listen\":\"127.0.0.1:0\",\"upstream\":\"${COFFER_TEST_S3_ENDPOINT#http://}\",\"enabled\":true}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"])')
    if [[ $ms -gt 0 ]]; then
        for stream in upstream downstream; do
            toxiproxy_api POST "/proxies/$name/toxics" \
                "{\"name\":\"lat-$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$((ms / 2))}}" >/dev/null
        done
    fi
    echo "http://$listen"
}
