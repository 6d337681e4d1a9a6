package deps
import ("testing"; G "gorgonia.org/gorgonia")
func TestX(t *testing.T){ g:=G.NewGraph(); x:=G.NewScalar(g,G.Float64,G.WithValue(2.0)); y:=G.Must(G.Mul(x,x)); m:=G.NewTapeMachine(g); if err:=m.RunAll();err!=nil{t.Fatal(err)}; t.Log(y.Value()) }
