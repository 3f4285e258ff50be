package reduce

// Complex elements are a real part followed by an imaginary part, each an
// IEEE float (Go's complex64 and complex128 layout). Every part of a result
// is NaN-canonical as for the real float types.
//
// Products use the textbook formula (a+bi)(c+di) = (ac-bd) + (ad+bc)i, as
// torch's c10::complex does, with every product rounded before it is added:
// the explicit conversions below forbid the compiler to fuse them into FMAs.
// Each product commutes and so does each sum, so op(x, y) and op(y, x) give
// identical bits; a fused a*d+bc would not, since it rounds ad and bc
// differently.

// reduceC64 applies op (Sum, Avg or Prod) element-wise to complex64 slices
// of equal length.
func reduceC64(d, s []complex64, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i, y := range s {
			x := d[i]
			d[i] = complex(canonF32(real(x)+real(y)), canonF32(imag(x)+imag(y)))
		}
	case Prod:
		for i, y := range s {
			a, b, c, e := real(d[i]), imag(d[i]), real(y), imag(y)
			re := float32(a*c) - float32(b*e)
			im := float32(a*e) + float32(b*c)
			d[i] = complex(canonF32(re), canonF32(im))
		}
	}
}

// reduceC128 applies op (Sum, Avg or Prod) element-wise to complex128 slices
// of equal length.
func reduceC128(d, s []complex128, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i, y := range s {
			x := d[i]
			d[i] = complex(canonF64(real(x)+real(y)), canonF64(imag(x)+imag(y)))
		}
	case Prod:
		for i, y := range s {
			a, b, c, e := real(d[i]), imag(d[i]), real(y), imag(y)
			re := float64(a*c) - float64(b*e)
			im := float64(a*e) + float64(b*c)
			d[i] = complex(canonF64(re), canonF64(im))
		}
	}
}

// divideC64 divides both parts of every element of s by n.
func divideC64(s []complex64, n int) {
	d := float32(n)
	for i, x := range s {
		s[i] = complex(canonF32(real(x)/d), canonF32(imag(x)/d))
	}
}

// divideC128 divides both parts of every element of s by n.
func divideC128(s []complex128, n int) {
	d := float64(n)
	for i, x := range s {
		s[i] = complex(canonF64(real(x)/d), canonF64(imag(x)/d))
	}
}
