package deps
import (
 _ "gorgonia.org/gorgonia"
 _ "gorgonia.org/tensor"
 _ "github.com/stretchr/testify/require"
 _ "codeberg.org/sbinet/npyio"
 _ "github.com/gofrs/flock"
 _ "gonum.org/v1/plot"
 _ "github.com/schollz/progressbar/v3"
)
