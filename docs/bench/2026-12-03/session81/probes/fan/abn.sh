#!/usr/bin/env bash
# abm.sh with one binary for every variant.
# usage: abn.sh BIN ROUNDS "label:ENV ..." -- compare opts   (ENV "-" for none)
bin=$1 rounds=$2; shift 2
variants=(); while [ "$1" != "--" ]; do variants+=("${1%%:*}|$bin|${1#*:}"); shift; done
exec "$(dirname "$0")/abm.sh" "$rounds" "${variants[@]}" "$@"
