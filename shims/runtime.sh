aileron_opname=
aileron_nl='
'
aileron_cr=$(printf '\r')

# aileron_err MESSAGE prints one line to stderr, prefixed by the command.
aileron_err() {
	printf '%s: %s\n' "$aileron_cmd${aileron_opname:+ $aileron_opname}" "$1" >&2
}

# aileron_usage MESSAGE reports a usage error and exits 64.
aileron_usage() {
	aileron_err "$1"
	printf "Run '%s --help' for the ${aileron_noun}s and their arguments.\n" "$aileron_cmd${aileron_opname:+ $aileron_opname}" >&2
	exit 64
}

# aileron_trim VALUE sets aileron_v to VALUE without surrounding blanks.
aileron_trim() {
	aileron_v=${1#"${1%%[! 	]*}"}
	aileron_v=${aileron_v%"${aileron_v##*[! 	]}"}
}

# aileron_json_string KEY TEXT sets aileron_v to the decoded value of the
# first "KEY":"..." in the JSON TEXT (enough for the daemon's error replies);
# it fails when there is none.
aileron_json_string() {
	aileron_v=
	case $2 in
	*"\"$1\":\""*) ;;
	*) return 1 ;;
	esac
	aileron_s=${2#*"\"$1\":\""}
	while :; do
		aileron_c=${aileron_s%%[\"\\]*}
		aileron_v=$aileron_v$aileron_c
		aileron_s=${aileron_s#"$aileron_c"}
		case $aileron_s in
		'' | '"'*) return 0 ;;
		esac
		aileron_s=${aileron_s#?}
		case $aileron_s in
		'"'*) aileron_v=$aileron_v'"' ;;
		'\'*) aileron_v=$aileron_v'\' ;;
		/*) aileron_v=$aileron_v/ ;;
		[bfnrt]*) aileron_v="$aileron_v " ;;
		u003[cC]*) aileron_v="$aileron_v<" ;;
		u003[eE]*) aileron_v="$aileron_v>" ;;
		u0026*) aileron_v="$aileron_v&" ;;
		u0027*) aileron_v="$aileron_v'" ;;
		u????*) aileron_v="$aileron_v\\${aileron_s%"${aileron_s#?????}"}" ;;
		*) return 0 ;;
		esac
		case $aileron_s in
		u????*) aileron_s=${aileron_s#?????} ;;
		*) aileron_s=${aileron_s#?} ;;
		esac
	done
}

case ${1-} in
'' | -h | --help | help)
	if [ "${1-}" = help ] && [ $# -gt 1 ]; then
		aileron_operation "$2" || aileron_usage "unknown $aileron_noun \"$2\"; ${aileron_noun}s: $aileron_ops"
		aileron_op_help "$2"
		exit 0
	fi
	aileron_help
	exit 0
	;;
-*)
	aileron_usage "unknown flag \"$1\"; the first argument is an $aileron_noun: $aileron_ops"
	;;
esac
aileron_operation "$1" || aileron_usage "unknown $aileron_noun \"$1\"; ${aileron_noun}s: $aileron_ops"
aileron_opname=$1
shift

aileron_args='{}'
aileron_have_args=0
aileron_json=0
while [ $# -gt 0 ]; do
	case $1 in
	-h | --help | help)
		aileron_op_help "$aileron_opname"
		exit 0
		;;
	--json)
		aileron_json=1
		;;
	--args | --args=*)
		[ "$aileron_have_args" = 0 ] || aileron_usage "--args given twice; pass one JSON object"
		case $1 in
		--args=*) aileron_args=${1#--args=} ;;
		*)
			[ $# -gt 1 ] || aileron_usage "--args needs a JSON object, e.g. --args '{\"name\":\"value\"}'"
			aileron_args=$2
			shift
			;;
		esac
		aileron_have_args=1
		;;
	*)
		aileron_usage "unknown argument \"$1\"; use --args '<json object>', --json or --help"
		;;
	esac
	shift
done

# The args go to the daemon byte for byte; only their outline is checked here.
aileron_ws=" 	$aileron_nl$aileron_cr"
aileron_t=${aileron_args#"${aileron_args%%[!$aileron_ws]*}"}
aileron_t=${aileron_t%"${aileron_t##*[!$aileron_ws]}"}
case $aileron_t in
'{'*'}') ;;
*) aileron_usage "--args must be a JSON object, e.g. --args '{\"name\":\"value\"}'" ;;
esac

if [ -z "${AILERON_API_URL-}" ]; then
	aileron_err "AILERON_API_URL is not set; run this inside an Aileron session (aileron-proxy launch sets it)"
	exit 69
fi
if [ -z "${AILERON_TOKEN-}" ]; then
	aileron_err "AILERON_TOKEN is not set; run this inside an Aileron session (aileron-proxy launch sets it)"
	exit 69
fi
case $AILERON_API_URL$AILERON_TOKEN${AILERON_SESSION_ID-} in
*"$aileron_nl"* | *"$aileron_cr"*)
	aileron_err "AILERON_API_URL, AILERON_TOKEN and AILERON_SESSION_ID must each be one line"
	exit 69
	;;
esac
if ! command -v wget >/dev/null 2>&1; then
	aileron_err "wget not found; the sandbox image needs BusyBox or GNU wget on PATH"
	exit 69
fi

umask 077
aileron_tmp=$(mktemp -d "${TMPDIR:-/tmp}/aileron-shim.XXXXXX") || {
	aileron_err "cannot create a temporary directory in ${TMPDIR:-/tmp}; set TMPDIR to a writable directory"
	exit 70
}
trap 'rm -rf "$aileron_tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# GNU wget shows error bodies only with --content-on-error, which BusyBox
# wget lacks: BusyBox discards the daemon's error replies and prints no
# headers for them, so only their HTTP status is known (docs/shims.md).
case $(wget --help 2>&1) in
*content-on-error*) aileron_gnu=1 ;;
*) aileron_gnu=0 ;;
esac

# BusyBox wget takes headers only as arguments, where the token would show
# in every process listing (the host's too); it goes in the request body,
# a private file, instead. printf is a shell builtin: no argv either.
aileron_auth=
if [ "$aileron_gnu" = 0 ]; then
	case $AILERON_TOKEN in
	*[!A-Za-z0-9._~+/=-]*)
		aileron_err "AILERON_TOKEN has characters an API token never has; use the api_token of an Aileron session"
		exit 69
		;;
	esac
	aileron_auth=",\"api_token\":\"$AILERON_TOKEN\""
fi
aileron_request >"$aileron_tmp/request" || {
	aileron_err "cannot write the request to $aileron_tmp"
	exit 70
}
aileron_url="${AILERON_API_URL%/}$aileron_path"
set -- -S -O "$aileron_tmp/body" --post-file "$aileron_tmp/request" \
	--header 'Content-Type: application/json'
if [ "$aileron_json" = 0 ]; then
	set -- "$@" --header 'X-Aileron-Output: body'
fi
if [ -n "${AILERON_SESSION_ID-}" ]; then
	set -- "$@" --header "X-Aileron-Session-Id: $AILERON_SESSION_ID"
fi
if [ "$aileron_gnu" = 1 ]; then
	# The token goes in a private startup file, not in wget's argv. The
	# daemon is called directly (--no-proxy), once (--tries=1).
	printf 'header = Authorization: Bearer %s\n' "$AILERON_TOKEN" >"$aileron_tmp/wgetrc" || {
		aileron_err "cannot write $aileron_tmp/wgetrc"
		exit 70
	}
	set -- "$@" --config="$aileron_tmp/wgetrc" -nv --tries=1 --max-redirect=0 --no-proxy --content-on-error
else
	# The token is in the request body (above). BusyBox wget never
	# retries; -Y off calls the daemon directly.
	set -- "$@" -q -Y off
fi
LC_ALL=C wget "$@" "$aileron_url" 2>"$aileron_tmp/log"
aileron_rc=$?

aileron_status=
aileron_reason=
aileron_upstream=
aileron_audit=
aileron_last=
while IFS= read -r aileron_line || [ -n "$aileron_line" ]; do
	aileron_line=${aileron_line%"$aileron_cr"}
	case $aileron_line in
	'  HTTP/'*)
		aileron_s=${aileron_line#'  HTTP/'}
		aileron_s=${aileron_s#* }
		aileron_status=${aileron_s%% *}
		aileron_reason=
		case $aileron_s in
		*' '*) aileron_reason=${aileron_s#* } ;;
		esac
		aileron_upstream=
		aileron_audit=
		;;
	'  X-Aileron-Upstream-Status:'* | '  x-aileron-upstream-status:'*)
		aileron_trim "${aileron_line#*:}"
		aileron_upstream=$aileron_v
		;;
	'  X-Aileron-Audit-Id:'* | '  x-aileron-audit-id:'*)
		aileron_trim "${aileron_line#*:}"
		aileron_audit=$aileron_v
		;;
	'  '*) ;;
	*[!\ ]*) aileron_last=$aileron_line ;;
	esac
done <"$aileron_tmp/log"
case $aileron_status in
[1-5][0-9][0-9]) ;;
*) aileron_status= ;;
esac

if [ -z "$aileron_status" ]; then
	case $aileron_last in
	*'No data received'* | *'Read error'* | *'error getting response'* | *'eset by peer'*)
		aileron_err "the Aileron daemon at ${AILERON_API_URL%/} closed the connection without a reply ($aileron_last); the $aileron_noun may have run, check before calling it again"
		;;
	*)
		aileron_err "cannot reach the Aileron daemon at ${AILERON_API_URL%/}: ${aileron_last:-wget exited with status $aileron_rc}"
		;;
	esac
	exit 69
fi

if [ "$aileron_status" = 200 ]; then
	if [ "$aileron_rc" != 0 ]; then
		aileron_err "the daemon's reply was cut off (${aileron_last:-wget exited with status $aileron_rc}); the $aileron_noun may have run${aileron_audit:+ (audit id $aileron_audit)}, check before calling it again"
		exit 69
	fi
	case $aileron_upstream in
	[1-5][0-9][0-9]) ;;
	*)
		if [ "$aileron_json" = 1 ]; then
			cat "$aileron_tmp/body"
		fi
		aileron_err "the daemon's reply has no X-Aileron-Upstream-Status header; this shim needs the daemon it was rendered by (render the tools again with the running aileron-proxy)"
		exit 76
		;;
	esac
	cat "$aileron_tmp/body" || exit 70
	case $aileron_upstream in
	2??) exit 0 ;;
	esac
	aileron_err "upstream status $aileron_upstream"
	exit 1
fi

aileron_code=
aileron_msg=
if [ -s "$aileron_tmp/body" ]; then
	aileron_body=$(cat "$aileron_tmp/body")
	case $aileron_body in
	'{'*)
		if aileron_json_string code "$aileron_body"; then
			aileron_code=$aileron_v
		fi
		if aileron_json_string message "$aileron_body"; then
			aileron_msg=$aileron_v
		fi
		;;
	esac
fi
case $aileron_code in
*[!a-z0-9_]*) aileron_code= ;;
esac

case $aileron_status in
400 | 404 | 405 | 409 | 413 | 415 | 422) aileron_exit=64 ;;
401 | 403 | 407) aileron_exit=77 ;;
*) aileron_exit=69 ;;
esac
case $aileron_code in
invalid_args | invalid_body | connector_operation_not_found | action_not_found) aileron_exit=64 ;;
operation_not_allowed | approval_denied | approval_timeout | credential_not_configured | unauthorized | session_mismatch) aileron_exit=77 ;;
esac

aileron_http="HTTP $aileron_status${aileron_reason:+ $aileron_reason}"
if [ -n "$aileron_msg" ]; then
	aileron_err "$aileron_msg (${aileron_code:+$aileron_code, }$aileron_http)"
elif [ -n "$aileron_code" ]; then
	aileron_err "the daemon refused the call: $aileron_code ($aileron_http)"
else
	case $aileron_status in
	400) aileron_why="the daemon refused the arguments; check them with '$aileron_cmd $aileron_opname --help'" ;;
	401) aileron_why="the daemon refused AILERON_TOKEN; the session may have ended" ;;
	403) aileron_why="denied: the $aileron_noun is not allowed in this session, its approval was denied or timed out, or it has no credential configured" ;;
	404) aileron_why="the daemon does not offer this $aileron_noun in this session (or AILERON_API_URL is wrong)" ;;
	*) aileron_why="the daemon answered with an error" ;;
	esac
	if [ "$aileron_gnu" = 0 ]; then
		aileron_why="$aileron_why; BusyBox wget does not show the daemon's reason, which is in the Aileron audit log"
	fi
	aileron_err "$aileron_why ($aileron_http)"
fi
exit "$aileron_exit"
