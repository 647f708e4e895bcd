#!/bin/sh
# Sends a notification: kind "notify". Its service kind is none: the
# channel neither deduplicates nor answers, so an attempt that ends
# without exit 0 leaves the worker unable to tell whether the message
# went out, and the task goes to needs_review rather than risk sending
# it twice. "fail_first": true makes the first attempt send and then
# exit 75, the demo of that.
set -eu
payload=$(cat)
dir=${EXAMPLE_STATE_DIR:-$(dirname "$0")/state}
mkdir -p "$dir"
echo "$LEASEHOLD_OPERATION_ID" >> "$dir/notifications"
case $payload in
*'"fail_first":true'*) [ "$LEASEHOLD_ATTEMPT" = 1 ] && exit 75 ;;
esac
echo '{"sent":true}'
