#!/usr/bin/env bash
# Start a real MongoDB for the test suite in Docker, and print its URI on stdout.
#
#   tools/mongodb_cluster.sh replset 7.0    # a one-node replica set  (mongo:7.0)
#   tools/mongodb_cluster.sh sharded 8.0    # config server + 2 shards + a mongos router
#
# Every node runs with enableTestCommands=1, so the fail points the suite arms
# (configureFailPoint failCommand) work. Used by .github/workflows/mongodb.yml; runs
# anywhere Docker does. `tools/mongodb_cluster.sh stop` removes what it started.
set -euo pipefail
mode=${1:?replset, sharded or stop}
version=${2:-8.0}
net=docmultilock-mongodb
image="mongo:${version}"
test_commands=(--setParameter enableTestCommands=1)

shell() {  # shell CONTAINER JS: mongosh where the image has it (6.0+), else the legacy mongo
    local tool
    tool=$(docker exec "$1" sh -c 'command -v mongosh || command -v mongo')
    docker exec "$1" "$tool" --quiet --port "$2" --eval "$3"
}

wait_up() {  # wait_up CONTAINER PORT
    for _ in $(seq 1 60); do
        shell "$1" "$2" 'db.adminCommand({ping: 1})' >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "mongodb in $1 did not answer on port $2" >&2
    docker logs "$1" >&2 || true
    return 1
}

wait_primary() {  # wait_primary CONTAINER PORT
    for _ in $(seq 1 60); do
        [ "$(shell "$1" "$2" 'db.hello ? db.hello().isWritablePrimary : db.isMaster().ismaster')" = "true" ] && return 0
        sleep 1
    done
    echo "no primary in $1" >&2
    return 1
}

replset() {  # replset NAME PORT ROLE-FLAGS...: a one-node replica set in container NAME
    local name=$1 port=$2
    shift 2
    docker run -d --rm --name "$name" --network "$net" --hostname "$name" -p "$port:$port" \
        "$image" mongod --replSet "$name" --port "$port" --bind_ip_all "${test_commands[@]}" "$@" >/dev/null
    wait_up "$name" "$port"
    shell "$name" "$port" "rs.initiate({_id: '$name', $( [ "$*" = "--configsvr" ] && echo 'configsvr: true,' ) members: [{_id: 0, host: '$name:$port'}]})" >/dev/null
    wait_primary "$name" "$port"
}

case "$mode" in
stop)
    docker rm -f rs0 cfg sh0 sh1 router >/dev/null 2>&1 || true
    docker network rm "$net" >/dev/null 2>&1 || true
    ;;
replset)
    docker network create "$net" >/dev/null 2>&1 || true
    replset rs0 27017 >&2
    # Containers resolve rs0 by name; the runner reaches the node on localhost.
    echo "mongodb://localhost:27017/?directConnection=true"
    ;;
sharded)
    docker network create "$net" >/dev/null 2>&1 || true
    replset cfg 27019 --configsvr >&2
    replset sh0 27018 --shardsvr >&2
    replset sh1 27020 --shardsvr >&2
    docker run -d --rm --name router --network "$net" --hostname router -p 27017:27017 \
        "$image" mongos --configdb cfg/cfg:27019 --port 27017 --bind_ip_all "${test_commands[@]}" >/dev/null
    wait_up router 27017 >&2
    shell router 27017 "sh.addShard('sh0/sh0:27018'); sh.addShard('sh1/sh1:27020')" >/dev/null
    # The suite's database, sharded, so that its collections may be sharded by the tests.
    shell router 27017 "sh.enableSharding('docmultilock_test')" >/dev/null
    echo "mongodb://localhost:27017/"
    ;;
*)
    echo "usage: $0 replset|sharded VERSION, or $0 stop" >&2
    exit 2
    ;;
esac
