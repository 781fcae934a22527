package overload

// list is a doubly linked list, oldest first, whose links live in its
// members (a Ticket is in its class's queue and in its tenant's, a Waiter
// in its key's line): joining allocates nothing, and a member leaves from
// anywhere in constant time.
type list[T any] struct {
	head, tail *link[T]
	n          int
}

// link is a member's place in a list.
type link[T any] struct {
	prev, next *link[T]
	v          *T
}

// push appends v, whose place is l, at the back.
func (q *list[T]) push(l *link[T], v *T) {
	l.v, l.prev, l.next = v, q.tail, nil
	if q.tail != nil {
		q.tail.next = l
	} else {
		q.head = l
	}
	q.tail = l
	q.n++
}

// remove takes the member whose place is l out of q.
func (q *list[T]) remove(l *link[T]) {
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		q.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		q.tail = l.prev
	}
	l.prev, l.next = nil, nil
	q.n--
}

// front returns the oldest member, nil when q is empty.
func (q *list[T]) front() *T {
	if q.head == nil {
		return nil
	}
	return q.head.v
}

// back returns the newest member, nil when q is empty.
func (q *list[T]) back() *T {
	if q.tail == nil {
		return nil
	}
	return q.tail.v
}
