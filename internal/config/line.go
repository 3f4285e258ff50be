package config

import (
	"fmt"
	"strconv"
	"syscall"

	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// lineEncoder writes Loggers' lines: a UTC timestamp, host:pid:tid, the rank, then
// "GONCCL LEVEL SUBSYSTEM" and the message (with any fields after it, as zap's
// console encoder writes them, durations with their unit), like NCCL's
// "host:pid:tid [rank] NCCL INFO ...".
type lineEncoder struct {
	zapcore.Encoder // the message and fields
	where           string
	rank            string
}

var linePool = buffer.NewPool()

func newLineEncoder(who Who) zapcore.Encoder {
	rank := ""
	if who.Rank >= 0 {
		rank = " [" + strconv.Itoa(who.Rank) + "]"
	}
	msg := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", ConsoleSeparator: " ",
		EncodeDuration: zapcore.StringDurationEncoder})
	return lineEncoder{Encoder: msg, where: fmt.Sprintf("%s:%d:", who.Host, who.Pid), rank: rank}
}

func (e lineEncoder) Clone() zapcore.Encoder {
	return lineEncoder{Encoder: e.Encoder.Clone(), where: e.where, rank: e.rank}
}

func (e lineEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	body, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return nil, err
	}
	defer body.Free()
	line := linePool.Get()
	line.AppendTime(ent.Time.UTC(), "2006-01-02T15:04:05.000000Z")
	line.AppendByte(' ')
	line.AppendString(e.where)
	line.AppendInt(int64(syscall.Gettid()))
	line.AppendString(e.rank)
	line.AppendString(" GONCCL ")
	line.AppendString(levelName(ent.Level))
	if ent.LoggerName != "" {
		line.AppendByte(' ')
		line.AppendString(ent.LoggerName)
	}
	line.AppendByte(' ')
	line.Write(body.Bytes())
	return line, nil
}

// levelName is a level as GONCCL_DEBUG names it: zap's debug level is what
// GONCCL_DEBUG=TRACE turns on, so its lines say TRACE.
func levelName(l zapcore.Level) string {
	if l == zapcore.DebugLevel {
		return "TRACE"
	}
	return l.CapitalString()
}
