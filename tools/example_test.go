package tools_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/lanefleet/lanefleet/sandbox"
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
	// Output:
	// write: Successfully wrote 21 bytes to notes/todo.txt
	// edit: Successfully replaced text in notes/todo.txt at line 2.
	// read: - write tests
	// - ship it
	// read error: path "../etc/passwd" escapes the workspace through ".."; only files inside the workspace can be accessed
}

func ExampleExec() {
	dir, err := os.MkdirTemp("", "workspace")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// Confined where the platform allows (the binary calls sandbox.Main
	// first thing); the fleet refuses to start otherwise, unless the
	// operator asked for Unconfined.
	ctx := context.Background()
	box, err := sandbox.New(ctx, sandbox.Config{})
	if errors.Is(err, sandbox.ErrUnavailable) {
		box, err = sandbox.New(ctx, sandbox.Config{Unconfined: true})
	}
	if err != nil {
		panic(err)
	}
	exec, err := tools.Exec(tools.Workspace{Dir: dir, Env: []string{"GREETING=hello"}}, box)
	if err != nil {
		panic(err)
	}
	res, err := exec.Call(ctx, tools.Call{Name: "exec", Args: map[string]any{"command": "echo $GREETING > greeting; cat greeting"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content[0].Text)
	// Output:
	// hello
	//
	// Command exited with code 0.
}
