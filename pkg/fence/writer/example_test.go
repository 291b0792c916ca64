package writer_test

import (
	"fmt"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// Two processes of one pod (before and after a container restart) are two writers: under one
// token the resource admits only the one that presented it first.
func Example() {
	const pod = "1f0c7a52-0000-4000-8000-000000000001"
	before := writer.ID(pod, writer.NewIncarnation()) // the process that died
	after := writer.Of(pod)                           // this process
	var m fence.Monotonic
	fmt.Println(m.Admit(before, 7)) // the dead process raised the fence
	fmt.Println(m.Admit(after, 7))  // the restarted one, same token: the term is over for it
	fmt.Println(writer.Owner(after) == pod)
	// Output:
	// <nil>
	// token 7 is in use by another writer
	// true
}
