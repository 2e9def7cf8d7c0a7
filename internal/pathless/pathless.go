// Package pathless strips the path from an *fs.PathError, for messages
// that already name the file (or must not show an internal absolute path)
// but still want the operation's cause.
package pathless

import (
	"errors"
	"io/fs"
)

// Err returns the cause inside the first *fs.PathError in err's chain,
// dropping that error's operation and path (and anything wrapping it), so
// errors.Is still sees fs.ErrNotExist and the like; err is returned
// unchanged when its chain holds no *fs.PathError.
func Err(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
