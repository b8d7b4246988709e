package shims

import _ "embed"

// scriptRuntime is the part of every shim that does not depend on the spec:
// argument parsing, the call to the run endpoint and the mapping of the reply
// to stdout, stderr and an exit status. It relies on the variables and
// functions the script's prelude writes before it (aileron_cmd,
// aileron_noun, aileron_ops, aileron_help, aileron_op_help,
// aileron_operation, aileron_request, and aileron_path, which
// aileron_operation may set): renderScript for connector tools,
// renderActionScript for action tools. Only POSIX sh features are used; the external commands
// are wget, cat, mktemp and rm. Tested under dash + GNU wget and BusyBox sh +
// BusyBox wget (shim_test.go). The text lives in runtime.sh, embedded
// as written, so it can be read and linted as a shell script.
//
//go:embed runtime.sh
var scriptRuntime string
