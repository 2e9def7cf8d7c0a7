package tools_test

import (
	"context"
	"fmt"
	"os"

	"github.com/lanefleet/lanefleet/tools"
)

func ExampleBuiltin() {
	dir, err := os.MkdirTemp("", "workspace")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	set, err := tools.Builtin(tools.Workspace{Dir: dir, Env: []string{"GREETING=hello"}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	call := func(name string, args map[string]any) {
		tool, _ := set.Lookup(name)
		res, err := tool.Call(ctx, tools.Call{Name: name, Args: args})
		if err != nil { // the runner turns this into an isError result
			fmt.Printf("%s error: %v\n", name, err)
			return
		}
		fmt.Printf("%s: %s\n", name, res.Content[0].Text)
	}

	call("write", map[string]any{"path": "notes/todo.txt", "content": "- write tests\n- ship\n"})
	call("edit", map[string]any{"path": "notes/todo.txt", "oldText": "ship", "newText": "ship it"})
	call("read", map[string]any{"path": "notes/todo.txt"})
	call("read", map[string]any{"path": "../etc/passwd"})
	call("exec", map[string]any{"command": "echo $GREETING; wc -l < notes/todo.txt"})
	// Output:
	// write: Successfully wrote 21 bytes to notes/todo.txt
	// edit: Successfully replaced text in notes/todo.txt at line 2.
	// read: - write tests
	// - ship it
	// read error: path "../etc/passwd" escapes the workspace through ".."; only files inside the workspace can be accessed
	// exec: hello
	// 2
	//
	// Command exited with code 0.
}
