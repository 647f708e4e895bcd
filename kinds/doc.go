// Package kinds reads a kinds file: for each kind of task a program
// serves, the JSON Schema its payloads must meet, the defaults its tasks
// take, and, for a worker, the command that runs it.
//
// # The file
//
//	{
//	  "kinds": {
//	    "report": {
//	      "schema": {"type": "object", "required": ["month"],
//	                 "properties": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}}},
//	      "defaults": {"attempts_max": 5, "budget": 10, "steps_max": 1, "lease": "30s", "timeout": "10m"},
//	      "worker": {"command": ["python3", "report.py"], "service": "dedup", "grace": "10s"}
//	    }
//	  }
//	}
//
// Every member is optional but "kinds", and a kind's "worker" needs its
// "command" and "service". Durations are Go durations ("30s", "1m30s").
// A relative "dir" (the commands' working directory) is taken from the
// kinds file's own directory, which is also the default. "service" says
// what the command's side effects allow the worker to do when a run's
// outcome is unknown (see ServiceKind); a "queryable" or "fenced" kind
// names a "reconcile" command.
//
// A file is refused whole, with an error naming the path of what is
// wrong, when a key repeats in one object (at any depth, the schemas'
// included), a member is unknown (outside the schemas, which are open),
// a kind's name breaks the kind rule (lower-case letters, digits and
// ._-, a letter first, at most 64 bytes), a schema does not compile, or a
// value is out of its bounds.
//
// # Validating payloads
//
// Validate checks a payload against its kind: a payload is a JSON object
// without repeated keys, and a kind with a schema also meets its schema
// (the compiled schema is reused). A refusal is a *model.ValidationError
// whose Field is the path inside the payload of the part refused
// (customer.email, lines[2].amount; "payload" for the whole) and whose
// Problem names the schema's rule (the keyword: required, type, pattern,
// maximum...). It never quotes a value of the payload: the schema
// library's own messages can, so they are not passed on. Validator
// returns the same check for one kind as a function, the shape an HTTP
// server or a queue takes a per-kind validator in.
//
// The schemas are compiled by github.com/santhosh-tekuri/jsonschema/v6:
// it implements drafts 4 to 2020-12 (a schema without "$schema" is read
// as 2020-12), passes the JSON-Schema-Test-Suite, and reports each
// failure as a tree of locations and typed keywords, which is what lets
// a refusal name the path and the rule without quoting the value. A
// schema's "$ref" may point only inside the kinds file: nothing is
// loaded from disk or the network.
package kinds
