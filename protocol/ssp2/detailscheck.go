package ssp2

import "errors"

// CheckDetailsJSON reports whether s is a valid PUSH_RESULT_DETAILS
// detailsJson object (at most 4096 bytes; at least one of fieldPaths,
// reason, requiredAction, references and no other member; the limits of
// each member), the check the encoder applies before writing the frame.
func CheckDetailsJSON(s string) error {
	if why := checkDetailsJSON(s); why != "" {
		return errors.New("detailsJson: " + why)
	}
	return nil
}
