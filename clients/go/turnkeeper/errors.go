package turnkeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every turnkeeper error.
const ErrorDomain = "turnkeeper.v1"

// FieldViolation is one google.rpc.BadRequest entry: a request field, by its path from the
// request root (for example "history.chat.messages[1].tool_call_id"), and what is wrong with it.
type FieldViolation struct {
	Field       string
	Description string
}

// Error is a failed call with the server's rich details decoded. Every error the Client
// returns is an *Error; use errors.As to get at it. status.FromError keeps working on it.
type Error struct {
	Code    codes.Code
	Message string
	// Reason is the ErrorInfo reason as sent, such as "ERROR_REASON_INVALID_HISTORY";
	// empty when the status carries no ErrorInfo (transport failures, deadlines).
	Reason string
	// Domain and Metadata come from the same ErrorInfo.
	Domain   string
	Metadata map[string]string
	// FieldViolations lists every google.rpc.BadRequest violation, in server order.
	FieldViolations []FieldViolation
	// PreconditionViolations are the google.rpc.PreconditionFailure entries of FAILED_PRECONDITION.
	PreconditionViolations []*errdetails.PreconditionFailure_Violation
	// CapacityReport is the pre-flight breakdown attached when the request does not fit the model.
	CapacityReport *turnkeeperv1.CapacityReport
	// RetryDelay is the google.rpc.RetryInfo delay an overloaded server asks for, when
	// HasRetryDelay (the Client's RetryPolicy honours it).
	RetryDelay    time.Duration
	HasRetryDelay bool

	status *status.Status
	cause  error
}

// FromError decodes err into an *Error; it returns nil for nil and err itself when it already
// is one. Context errors map to Canceled and DeadlineExceeded.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// status.FromError would replace the server's message with the wrapping error's text.
	var st *status.Status
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) && grpcErr.GRPCStatus() != nil {
		st = grpcErr.GRPCStatus()
	} else {
		// Context errors map to Canceled or DeadlineExceeded, anything else to Unknown.
		st = status.FromContextError(err)
	}
	e = &Error{Code: st.Code(), Message: st.Message(), status: st, cause: err}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			e.Reason, e.Domain, e.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.PreconditionFailure:
			e.PreconditionViolations = append(e.PreconditionViolations, d.GetViolations()...)
		case *turnkeeperv1.CapacityReport:
			e.CapacityReport = d
		case *errdetails.RetryInfo:
			e.RetryDelay, e.HasRetryDelay = d.GetRetryDelay().AsDuration(), true
		}
	}
	return e
}

// Error renders the code, the reason and the server's message.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "turnkeeper: %s", e.Code)
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// GRPCStatus lets status.FromError and status.Code read the original status.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Unwrap returns the error the call failed with.
func (e *Error) Unwrap() error { return e.cause }

// Is makes a call that failed with DEADLINE_EXCEEDED or CANCELLED match context.DeadlineExceeded or
// context.Canceled under errors.Is, whichever side set it: grpc-go reports an expired or cancelled
// context as a status error that does not wrap the context's error, and the server may send the
// code itself.
func (e *Error) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	return false
}

// ErrorReason returns Reason as the contract's enum; ERROR_REASON_UNSPECIFIED when absent,
// from another domain, or unknown to this client version.
func (e *Error) ErrorReason() turnkeeperv1.ErrorReason {
	if e.Domain != ErrorDomain {
		return turnkeeperv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return turnkeeperv1.ErrorReason(turnkeeperv1.ErrorReason_value[e.Reason])
}

// Fields returns the field paths of the BadRequest violations, in server order.
func (e *Error) Fields() []string {
	fields := make([]string, len(e.FieldViolations))
	for i, v := range e.FieldViolations {
		fields[i] = v.Field
	}
	return fields
}

// ReasonOf returns the turnkeeper ErrorReason of err, or ERROR_REASON_UNSPECIFIED.
func ReasonOf(err error) turnkeeperv1.ErrorReason {
	if e := FromError(err); e != nil {
		return e.ErrorReason()
	}
	return turnkeeperv1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// ConversionError reports provider JSON, or a history, that a converter cannot carry. It is the
// package's second error type beside *Error: a call fails with *Error, a conversion with
// *ConversionError (use errors.As to tell them apart).
type ConversionError struct {
	// Path names the offending element from the converted value's root, such as
	// "messages[3].content[1]"; empty when the whole value is at fault.
	Path string
	// Reason says what is wrong with it.
	Reason string
}

// Error renders the path and the reason.
func (e *ConversionError) Error() string {
	if e.Path == "" {
		return "turnkeeper: cannot convert: " + e.Reason
	}
	return fmt.Sprintf("turnkeeper: cannot convert %s: %s", e.Path, e.Reason)
}
